/* Conformance of the whole-model kernels (shaders/lm/embed.comp, swiglu.comp, logprob.comp and
 * the residual shaders/core/axpby.comp) against ref/ref_lm.c, over odd shapes, fresh random
 * inputs and poisoned outputs.
 *
 * Error bounds (u = 2^-24):
 *  - embed: a copy of the table (widened from F16/BF16): bit-exact, every dtype, chunked tables.
 *  - swiglu: exp is within 3 + 2|x| ulp on Vulkan (|x| <= 8 here: 19 ulp), the divide 2.5 ulp and
 *    the product 0.5 ulp, so per element |got - ref| <= 32 u |silu(g)| |u| + the rounding of the
 *    result; asserted |got - ref| <= 64 u |ref| + 1e-30.
 *  - logprob: each lane sums ceil(V / LS) terms, then a log2(LS)-deep tree (LS <= 256), so the sum
 *    is within (ceil(V / 64) + 8) u relative; the terms' exp adds (3 + 2 |x - max|) ulp with
 *    |x - max| <= 24 here, and log 3 ulp: asserted |got - ref| <= 4 (ceil(V / 64) + 64) u (1 + |ref|),
 *    for both the target log-probability and the full rows. NaN never passes. */
#include "vkh2o_test.h"
#include "lm_internal.h"
#include "ref_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U (1.0 / 16777216.0)

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- embed ---- */

static void embed_case(vkh2o_dtype dt, uint32_t vocab, uint32_t cols, uint32_t n, uint64_t limit, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    size_t es = vkh2o_dtype_size(dt);
    uint8_t* raw = malloc((size_t)vocab * cols * es);
    float* wide = malloc((size_t)vocab * cols * 4);
    assert_true(raw && wide);
    for (size_t i = 0; i < (size_t)vocab * cols; i++) {
        float v = 4.0f * vt_normal(rng);
        if (dt == VKH2O_DTYPE_F32) {
            memcpy(raw + 4 * i, &v, 4);
            wide[i] = v;
        } else {
            uint16_t h = dt == VKH2O_DTYPE_BF16 ? vkh2o_f32_to_bf16(v) : vkh2o_f32_to_f16(v);
            memcpy(raw + 2 * i, &h, 2);
            wide[i] = dt == VKH2O_DTYPE_BF16 ? vkh2o_bf16_to_f32(h) : vkh2o_f16_to_f32(h);
        }
    }
    vkh2o_tensor_view v = { .name = "embed_tokens", .file = "(test)", .dtype = dt, .ndim = 2, .shape = { vocab, cols },
                            .numel = (uint64_t)vocab * cols, .data = raw, .nbytes = (uint64_t)vocab * cols * es };
    vkh2o_dev_weight w;
    assert_int_equal(vkh2o_weight_upload_limit(ctx, &v, limit, &w), VKH2O_OK);
    uint32_t* ids = malloc(n * 4);
    assert_non_null(ids);
    for (uint32_t t = 0; t < n; t++)
        ids[t] = t == 0 ? 0 : t == 1 ? vocab - 1 : vt_u32_below(rng, vocab);
    const uint32_t os = cols + 3;   /* a gap after every row must keep its poison */
    vkh2o_buffer* bid = vt_buffer(n * 4);
    assert_int_equal(vkh2o_buffer_upload(bid, 0, ids, n * 4), VKH2O_OK);
    vkh2o_buffer* bout = vt_buffer((size_t)n * os * 4);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_embed(ctx, cb, &w, vkh2o_bind_range(bid, 0, n * 4), n,
                                     vkh2o_bind_range(bout, 0, (VkDeviceSize)n * os * 4), os, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    float* got = malloc((size_t)n * os * 4);
    assert_non_null(got);
    vt_download_f32(bout, got, (size_t)n * os);
    vt_check_guard(bout, (size_t)n * os * 4);
    size_t bad = 0;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t c = 0; c < os; c++) {
            uint32_t g = bits(got[(size_t)t * os + c]);
            uint32_t want = c < cols ? bits(wide[(size_t)ids[t] * cols + c]) : VT_POISON;
            bad += g != want;
        }
    printf("  embed %s vocab %u cols %u tokens %u chunks %u: %zu mismatches\n", vkh2o_dtype_name(dt), vocab, cols, n,
           w.nchunks, bad);
    assert_int_equal(bad, 0);
    vkh2o_weight_free(&w);
    vkh2o_buffer_destroy(bid);
    vkh2o_buffer_destroy(bout);
    free(raw); free(wide); free(ids); free(got);
}

static void test_embed(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("embed"));
    embed_case(VKH2O_DTYPE_F32, 256, 128, 37, 0, &rng);
    embed_case(VKH2O_DTYPE_F32, 1, 1, 1, 0, &rng);
    embed_case(VKH2O_DTYPE_BF16, 301, 77, 65, 0, &rng);
    embed_case(VKH2O_DTYPE_F16, 97, 130, 9, 0, &rng);
    /* chunked tables (a binding limit of a few rows): ids spread over every chunk */
    embed_case(VKH2O_DTYPE_BF16, 300, 72, 200, 32 * 72 * 2, &rng);
    embed_case(VKH2O_DTYPE_F32, 131, 33, 50, 10 * 36 * 4, &rng);
    vt_check_validation();
}

/* ---- swiglu ---- */

static void swiglu_case(uint32_t rows, uint32_t cols, bool packed, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    /* packed: gate and up side by side in one [rows, 2 cols] buffer, as the MLP writes them */
    const uint32_t gs = packed ? 2 * cols : cols + 1, us = packed ? 2 * cols : cols + 2, ys = cols + 3;
    size_t ng = (size_t)rows * gs, nu = (size_t)rows * us, ny = (size_t)rows * ys;
    float* g = malloc(ng * 4);
    float* u = malloc(nu * 4);
    float* ref = malloc(ny * 4);
    float* got = malloc(ny * 4);
    assert_true(g && u && ref && got);
    vt_fill_normal(rng, g, ng, 3.0f);
    for (size_t i = 0; i < ng; i++)
        g[i] = fmaxf(-8.0f, fminf(8.0f, g[i]));
    vt_fill_normal(rng, u, nu, 2.0f);
    vkh2o_buffer* bg = vt_upload_f32(g, ng);
    vkh2o_buffer* bu = packed ? bg : vt_upload_f32(u, nu);
    const float* uh = packed ? g + cols : u;
    vkh2o_buffer* by = vt_buffer(ny * 4);
    vkh2o_swiglu_args a = { .rows = rows, .cols = cols, .g_stride = gs, .u_stride = us, .y_stride = ys };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_swiglu(ctx, cb, &a, vkh2o_bind_range(bg, 0, ng * 4),
                                      packed ? vkh2o_bind_range(bg, cols * 4, ng * 4 - cols * 4) : vkh2o_bind_range(bu, 0, nu * 4),
                                      vkh2o_bind_range(by, 0, ny * 4), NULL), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vt_download_f32(by, got, ny);
    vt_check_guard(by, ny * 4);
    ref_swiglu(rows, cols, g, gs, uh, us, ref, ys);
    double worst = 0.0;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < ys; c++) {
            float x = got[(size_t)r * ys + c];
            if (c >= cols) {
                assert_int_equal(bits(x), VT_POISON);
                continue;
            }
            double want = ref[(size_t)r * ys + c];
            assert_false(isnan(x));
            double err = fabs((double)x - want), tol = 64.0 * U * fabs(want) + 1e-30;
            if (err / tol > worst)
                worst = err / tol;
        }
    printf("  swiglu rows %u cols %u%s: worst error %.3f of the bound\n", rows, cols, packed ? " (packed)" : "", worst);
    assert_true(worst <= 1.0);
    vkh2o_buffer_destroy(bg);
    if (!packed)
        vkh2o_buffer_destroy(bu);
    vkh2o_buffer_destroy(by);
    free(g); free(u); free(ref); free(got);
}

static void test_swiglu(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("swiglu"));
    swiglu_case(1, 1, false, &rng);
    swiglu_case(3, 63, false, &rng);
    swiglu_case(17, 257, false, &rng);
    swiglu_case(5, 256, true, &rng);
    swiglu_case(2, 1000, true, &rng);   /* packed: the up half starts 16-byte aligned */
    vt_check_validation();
}

/* ---- logprob ---- */

static void logprob_case(uint32_t rows, uint32_t vocab, bool targets, bool full, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    const uint32_t xs = vocab + 2, fs = vocab + 1;
    size_t nx = (size_t)rows * xs, nf = (size_t)rows * fs;
    float* x = malloc(nx * 4);
    uint32_t* tgt = malloc(rows * 4);
    double* lp = malloc(rows * 8);
    double* fr = malloc(nf * 8);
    float* glp = malloc(rows * 4);
    float* gf = malloc(nf * 4);
    assert_true(x && tgt && lp && fr && glp && gf);
    vt_fill_normal(rng, x, nx, 4.0f);
    for (size_t i = 0; i < nx; i++)
        x[i] = fmaxf(-12.0f, fminf(12.0f, x[i]));
    for (uint32_t r = 0; r < rows; r++)
        tgt[r] = r == 0 ? 0 : r == 1 ? vocab - 1 : vt_u32_below(rng, vocab);
    vkh2o_buffer* bx = vt_upload_f32(x, nx);
    vkh2o_buffer* bt = vt_buffer(rows * 4);
    assert_int_equal(vkh2o_buffer_upload(bt, 0, tgt, rows * 4), VKH2O_OK);
    vkh2o_buffer* blp = vt_buffer(rows * 4);
    vkh2o_buffer* bf = vt_buffer(nf * 4);
    vkh2o_logprob_args a = { .rows = rows, .vocab = vocab, .x_stride = xs, .full_stride = fs, .targets = targets, .full = full };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_logprob(ctx, cb, &a, vkh2o_bind_range(bx, 0, nx * 4), vkh2o_bind_range(bt, 0, rows * 4),
                                       vkh2o_bind_range(blp, 0, rows * 4), vkh2o_bind_range(bf, 0, nf * 4), NULL), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vt_download_f32(blp, glp, rows);
    vt_download_f32(bf, gf, nf);
    vt_check_guard(blp, rows * 4);
    vt_check_guard(bf, nf * 4);
    ref_log_softmax(rows, vocab, x, xs, tgt, lp, fr, fs, NULL);
    const double k = 4.0 * (ceil(vocab / 64.0) + 64.0) * U;
    double worst = 0.0;
    for (uint32_t r = 0; r < rows; r++) {
        if (targets) {
            assert_false(isnan(glp[r]));
            double e = fabs(glp[r] - lp[r]) / (k * (1.0 + fabs(lp[r])));
            worst = e > worst ? e : worst;
        } else {
            assert_int_equal(bits(glp[r]), VT_POISON);
        }
        for (uint32_t c = 0; c < fs; c++) {
            float g = gf[(size_t)r * fs + c];
            if (!full || c >= vocab) {
                assert_int_equal(bits(g), VT_POISON);
                continue;
            }
            assert_false(isnan(g));
            double want = fr[(size_t)r * fs + c];
            double e = fabs(g - want) / (k * (1.0 + fabs(want)));
            worst = e > worst ? e : worst;
        }
    }
    printf("  logprob rows %u vocab %u%s%s: worst error %.3f of the bound\n", rows, vocab, targets ? " targets" : "",
           full ? " full" : "", worst);
    assert_true(worst <= 1.0);
    vkh2o_buffer_destroy(bx); vkh2o_buffer_destroy(bt); vkh2o_buffer_destroy(blp); vkh2o_buffer_destroy(bf);
    free(x); free(tgt); free(lp); free(fr); free(glp); free(gf);
}

static void test_logprob(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("logprob"));
    logprob_case(1, 1, true, true, &rng);
    logprob_case(3, 7, true, false, &rng);
    logprob_case(17, 256, true, true, &rng);
    logprob_case(5, 1000, false, true, &rng);
    logprob_case(2, 4099, true, false, &rng);
    vt_check_validation();
}

static void test_bad_args(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b = vt_buffer(64);
    vkh2o_binding x = vkh2o_bind_range(b, 0, 64);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_logprob_args none = { .rows = 1, .vocab = 4 };
    assert_int_equal(vkh2o_cmd_logprob(ctx, cb, &none, x, x, x, x, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_logprob_args narrow = { .rows = 1, .vocab = 4, .x_stride = 3, .targets = true };
    assert_int_equal(vkh2o_cmd_logprob(ctx, cb, &narrow, x, x, x, x, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_swiglu_args s = { .rows = 0, .cols = 4 };
    assert_int_equal(vkh2o_cmd_swiglu(ctx, cb, &s, x, x, x, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_cmd_axpby(ctx, cb, 0, 1.0f, x, 1.0f, x, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_dev_weight empty = { 0 };
    assert_int_equal(vkh2o_cmd_embed(ctx, cb, &empty, x, 1, x, 4, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(b);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_logprob),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
