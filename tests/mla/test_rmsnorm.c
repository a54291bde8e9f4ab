/* Conformance of shaders/mla/rmsnorm.comp (vkh2o_cmd_rmsnorm: RMSNorm of strided rows, with the
 * optional RoPE tail and its broadcast into every head of K) against ref/ref_mla.c.
 *
 * Error bounds (u = 2^-24):
 *  - normed part: each lane sums ceil(n/64) squares, then a 64-wide tree: at most
 *    ceil(n/64) + 6 fp32 additions deep, all terms positive, so the mean square is within
 *    (ceil(n/64) + 6) u relative; sqrt, divide and two products add 4 u. Asserted:
 *    nmse <= 4 (ceil(n/64) + 10)^2 u^2 (n = 1536: 1.6e-11).
 *  - roped tail and its broadcast copies: nmse <= 1e-12 as in test_rope.c; the copies must
 *    equal the tail bit for bit, and every element the op must not write (stride gaps, the
 *    non-rope part of K, guard words) keeps its poison. NaN never passes.
 *  - the device-position variant (pos_buf: the base position read on the device from a u32 at
 *    an odd word of a poisoned buffer, as the decode reads a cache's next position): the same
 *    bounds at base + pos0 + row; rows whose position reaches 2^24 (the table's limit) must be
 *    NaN in the tail and in every broadcast copy, including a base that would wrap 32 bits. */
#include "vkh2o_test.h"
#include "mla_internal.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct norm_case {
    uint32_t rows, n, x_pad, y_pad, rope;
    bool interleave;
    uint32_t pos0, bc_heads;
    bool dev;               /* the base position from a device buffer */
    uint32_t base;
} norm_case;

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void run_case(const norm_case* c, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    const uint32_t xs = c->n + c->rope + c->x_pad, ys = c->n + c->y_pad;
    const uint32_t pes = c->rope + 1;                       /* one gap element per pe row */
    const uint32_t bc_off = 5, bc_hs = bc_off + c->rope + 2, bc_ts = c->bc_heads * bc_hs + 3;
    const size_t nx = (size_t)c->rows * xs, ny = (size_t)c->rows * ys, npe = (size_t)c->rows * pes;
    const size_t nbc = c->bc_heads ? (size_t)c->rows * bc_ts : 1;
    float* x = malloc(nx * 4);
    float* w = malloc(c->n * 4);
    float* yr = malloc(ny * 4);
    float* yg = malloc(ny * 4);
    float* per = malloc(npe * 4);
    float* peg = malloc(npe * 4);
    float* bcg = malloc(nbc * 4);
    assert_true(x && w && yr && yg && per && peg && bcg);
    vt_fill_normal(rng, x, nx, 3.0f);
    for (uint32_t i = 0; i < c->n; i++)
        w[i] = 1.0f + 0.3f * vt_normal(rng);

    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    cfg.qk_rope_head_dim = c->rope ? c->rope : 2;
    float inv_freq[VKH2O_ROPE_MAX_DIM / 2], af = 1.0f;
    vkh2o_mla_rope_params(&cfg, inv_freq, &af);
    const uint64_t ntab = vkh2o_rope_table_floats(cfg.qk_rope_head_dim);
    float* tab = malloc(ntab * 4);
    assert_non_null(tab);
    vkh2o_rope_table_fill(inv_freq, cfg.qk_rope_head_dim, af, tab);

    vkh2o_buffer* bx = vt_upload_f32(x, nx);
    vkh2o_buffer* bw = vt_upload_f32(w, c->n);
    vkh2o_buffer* bt = vt_upload_f32(tab, ntab);
    vkh2o_buffer* by = vt_buffer(ny * 4);
    vkh2o_buffer* bpe = vt_buffer(npe * 4);
    vkh2o_buffer* bbc = vt_buffer(nbc * 4);
    const uint32_t pos_word = 3;
    vkh2o_buffer* bpos = vt_buffer(4 * 8);
    assert_int_equal(vkh2o_buffer_upload(bpos, 4 * pos_word, &c->base, 4), VKH2O_OK);
    vkh2o_rmsnorm_args a = { .rows = c->rows, .n = c->n, .x_stride = xs, .y_stride = ys, .eps = 1e-6f,
                             .rope = c->rope, .interleave = c->interleave, .pos0 = c->pos0, .pe_stride = pes,
                             .bc_heads = c->bc_heads, .bc_tok_stride = bc_ts, .bc_head_stride = bc_hs,
                             .bc_offset = bc_off, .pos_buf = c->dev ? bpos : NULL, .pos_word = pos_word };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, cb, &a, vkh2o_bind_range(bx, 0, nx * 4), vkh2o_bind_range(bw, 0, c->n * 4),
                                       vkh2o_bind_range(bt, 0, ntab * 4), vkh2o_bind_range(by, 0, ny * 4),
                                       vkh2o_bind_range(bpe, 0, npe * 4), vkh2o_bind_range(bbc, 0, nbc * 4)),
                     VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vt_download_f32(by, yg, ny);
    vt_download_f32(bpe, peg, npe);
    vt_download_f32(bbc, bcg, nbc);
    vt_check_guard(by, ny * 4);
    vt_check_guard(bpe, npe * 4);
    vt_check_guard(bbc, nbc * 4);

    /* normed part */
    memcpy(yr, yg, ny * 4);   /* gaps compared below */
    ref_rmsnorm(x, c->rows, c->n, xs, w, 1e-6, yr, ys);
    float* g = malloc((size_t)c->rows * (c->n + c->rope) * 4);
    float* r = malloc((size_t)c->rows * (c->n + c->rope) * 4);
    size_t k = 0;
    for (uint32_t row = 0; row < c->rows; row++) {
        for (uint32_t i = 0; i < c->n; i++, k++) {
            g[k] = yg[(size_t)row * ys + i];
            r[k] = yr[(size_t)row * ys + i];
        }
        for (uint32_t i = c->n; i < ys; i++)
            assert_int_equal(bits(yg[(size_t)row * ys + i]), VT_POISON);
    }
    const double u = ldexp(1.0, -24), depth = ceil(c->n / 64.0) + 10.0;
    char label[128];
    snprintf(label, sizeof label, "rmsnorm rows=%u n=%u", c->rows, c->n);
    vt_assert_nmse(label, g, r, k, 4.0 * depth * depth * u * u);

    if (c->rope) {
        k = 0;
        uint32_t out_of_range = 0;
        for (uint32_t row = 0; row < c->rows; row++) {
            const uint64_t pos = (c->dev ? (uint64_t)c->base : 0) + c->pos0 + row;
            if (pos >= VKH2O_ROPE_MAX_POSITION) {   /* NaN, not a wrapped angle */
                for (uint32_t i = 0; i < c->rope; i++)
                    if (!isnan(peg[(size_t)row * pes + i]))
                        fail_msg("row %u at position %llu >= 2^24: tail element %u is %g, not NaN", row,
                                 (unsigned long long)pos, i, peg[(size_t)row * pes + i]);
                out_of_range++;
            } else {
                float ref_pe[VKH2O_ROPE_MAX_DIM];
                ref_rope(x + (size_t)row * xs + c->n, c->rope, c->interleave, (uint32_t)pos, inv_freq, af, ref_pe);
                for (uint32_t i = 0; i < c->rope; i++, k++) {
                    g[k] = peg[(size_t)row * pes + i];
                    r[k] = ref_pe[i];
                }
            }
            assert_int_equal(bits(peg[(size_t)row * pes + c->rope]), VT_POISON);
            for (uint32_t h = 0; h < c->bc_heads; h++)
                for (uint32_t e = 0; e < bc_hs; e++) {
                    float v = bcg[(size_t)row * bc_ts + (size_t)h * bc_hs + e];
                    if (e >= bc_off && e < bc_off + c->rope)
                        assert_int_equal(bits(v), bits(peg[(size_t)row * pes + e - bc_off]));
                    else
                        assert_int_equal(bits(v), VT_POISON);
                }
            for (uint32_t e = c->bc_heads * bc_hs; c->bc_heads && e < bc_ts; e++)
                assert_int_equal(bits(bcg[(size_t)row * bc_ts + e]), VT_POISON);
        }
        snprintf(label, sizeof label, "  rope tail r=%u pos0=%u heads=%u %s%s", c->rope, c->pos0, c->bc_heads,
                 c->interleave ? "il" : "half", c->dev ? " base on device" : "");
        if (k)
            vt_assert_nmse(label, g, r, k, 1e-12);
        if (out_of_range)
            printf("#   %s: %u rows at positions >= 2^24 are NaN\n", label, out_of_range);
    } else {
        for (size_t i = 0; i < npe; i++)
            assert_int_equal(bits(peg[i]), VT_POISON);
    }
    vkh2o_buffer* bufs[] = { bx, bw, bt, by, bpe, bbc, bpos };
    for (size_t i = 0; i < 7; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(x); free(w); free(yr); free(yg); free(per); free(peg); free(bcg); free(tab); free(g); free(r);
}

static void test_shapes(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("rmsnorm shapes"));
    const norm_case cases[] = {
        { 1, 1, 0, 0, 0, false, 0, 0, false, 0 },
        { 5, 7, 2, 1, 0, false, 0, 0, false, 0 },
        { 37, 100, 0, 3, 0, false, 0, 0, false, 0 },
        { 3, 1536, 0, 0, 0, false, 0, 0, false, 0 },          /* q_a_layernorm */
        { 13, 24, 1, 2, 8, true, 9, 3, false, 0 },            /* small MLA: kv_lora 24, rope 8, 3 heads */
        { 13, 24, 0, 0, 8, false, 0, 1, false, 0 },
        { 6, 512, 0, 0, 64, true, 70000, 5, false, 0 },       /* Kimi kv_a: [512 | 64] */
        { 4, 65, 3, 0, 2, true, 1, 0, false, 0 },             /* tail without broadcast */
        /* the base position read on the device */
        { 13, 24, 1, 2, 8, true, 2, 3, true, 11 },
        { 6, 512, 0, 0, 64, true, 0, 5, true, 123457 },
        { 7, 65, 0, 1, 6, false, 1, 2, true, (1u << 24) - 5 },   /* rows 4..6 at 2^24 and past: NaN */
        { 3, 24, 0, 0, 8, false, 0, 2, true, 0xfffffff0u },       /* base + row would wrap 32 bits */
        { 5, 7, 2, 1, 0, false, 0, 0, true, 9 },                  /* no tail: the base is not read */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], &rng);
    vt_check_validation();
}

static void test_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b = vt_buffer(4096);
    vkh2o_binding bb = vkh2o_bind(b);
    vkh2o_rmsnorm_args a = { .rows = 2, .n = 8, .x_stride = 8, .y_stride = 8, .eps = 1e-6f };
    a.rows = 0;
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.rows = 2, a.y_stride = 7;   /* y rows overlap */
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.y_stride = 8, a.rope = 4;   /* x rows too short for the tail */
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.x_stride = 13, a.rope = 5;  /* odd */
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.rope = 4, a.pos0 = (1u << 24) - 1;
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.pos0 = 0, a.pos_buf = b, a.pos_word = (4096 + VT_GUARD_BYTES) / 4;   /* the position word past its buffer */
    assert_int_equal(vkh2o_cmd_rmsnorm(ctx, VK_NULL_HANDLE, &a, bb, bb, bb, bb, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(b);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
